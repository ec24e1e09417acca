"""An endpoint that raises: the caller gets an ActorError, and the actor keeps serving."""

from monarch.actor import Actor, ActorError, endpoint, this_host


class Validator(Actor):
    @endpoint
    def check(self, x: int) -> int:
        if x < 0:
            raise ValueError(f"bad input {x}")
        return x * 2


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    validators = procs.spawn("validators", Validator)
    try:
        validators.check.call(-1).get()
    except ActorError as error:
        print("caught:", repr(error.exception))
        print(error)
    print("still serving:", list(validators.check.call(21).get().values()))
    procs.stop().get()


if __name__ == "__main__":
    main()
