from switchyard.libs.bus import run_service
from switchyard.services.safety_in.service import setup
from switchyard.services.safety_in.settings import SafetyInSettings

if __name__ == "__main__":
    run_service("safety_in", SafetyInSettings(), setup)
