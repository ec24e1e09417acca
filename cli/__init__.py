"""The `monarch` command line."""


def main() -> None:
    from monarch.cli._app import app

    app()
