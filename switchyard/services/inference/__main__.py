import uuid

from switchyard.libs.bus import run_service
from switchyard.services.inference.service import setup
from switchyard.services.inference.settings import InferenceSettings

if __name__ == "__main__":
    settings = InferenceSettings()
    # The replica id is also this replica's subject (`infer.<pool>.<replica>`), so it must exist up front.
    settings.replica = settings.replica or uuid.uuid4().hex[:8]
    run_service("inference", settings, setup)
