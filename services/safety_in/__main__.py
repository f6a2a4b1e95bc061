import asyncio

from libs.bus import serve
from services.safety_in.service import setup
from services.safety_in.settings import SafetyInSettings


def main() -> None:
    settings = SafetyInSettings()
    asyncio.run(
        serve(
            "safety_in",
            settings.nats_url,
            lambda bus: setup(bus, settings),
            replica=settings.replica,
            log_level=settings.log_level,
        )
    )


if __name__ == "__main__":
    main()
