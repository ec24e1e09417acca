"""Half the mesh says hello, the other half says bye: slices address parts of a mesh."""

from monarch.actor import Actor, current_rank, endpoint, this_host


class Speaker(Actor):
    @endpoint
    def say(self, word: str) -> str:
        return f"{word} from {dict(current_rank())}"


def main() -> None:
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 4})
    speakers = procs.spawn("speakers", Speaker)
    hello = speakers.slice(gpus=slice(0, 2)).say.call("hello")
    bye = speakers.slice(gpus=slice(2, 4)).say.call("bye")
    for _, text in hello.get().items():
        print(text)
    for _, text in bye.get().items():
        print(text)
    print("one actor:", speakers.slice(hosts=1, gpus=3).say.call_one("hi").get())
    procs.stop().get()


if __name__ == "__main__":
    main()
