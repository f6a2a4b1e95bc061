import asyncio

from libs.bus import serve
from services.router.service import setup
from services.router.settings import RouterSettings


def main() -> None:
    settings = RouterSettings()
    asyncio.run(
        serve(
            "router",
            settings.nats_url,
            lambda bus: setup(bus, settings),
            replica=settings.replica,
            log_level=settings.log_level,
        )
    )


if __name__ == "__main__":
    main()
