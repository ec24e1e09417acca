"""Hello from 8 procs: spawn a mesh of actors and call them all at once."""

from monarch.actor import Actor, current_rank, endpoint, this_host


class Greeter(Actor):
    @endpoint
    def hello(self, who: str) -> str:
        return f"hello {who} from rank {current_rank().rank}"


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 8})
    greeters = procs.spawn("greeters", Greeter)
    for point, text in greeters.hello.call("world").get().items():
        print(point, text)
    procs.stop().get()


if __name__ == "__main__":
    main()
