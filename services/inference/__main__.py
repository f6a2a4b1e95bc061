import asyncio
import uuid

from libs.bus import serve
from services.inference.service import setup
from services.inference.settings import InferenceSettings


def main() -> None:
    settings = InferenceSettings()
    # The replica id is also this replica's subject (`infer.<pool>.<replica>`), so it must exist up front.
    settings.replica = settings.replica or uuid.uuid4().hex[:8]
    asyncio.run(
        serve(
            "inference",
            settings.nats_url,
            lambda bus: setup(bus, settings),
            replica=settings.replica,
            log_level=settings.log_level,
        )
    )


if __name__ == "__main__":
    main()
