from switchyard.libs.bus import run_service
from switchyard.services.safety_out.service import setup
from switchyard.services.safety_out.settings import SafetyOutSettings

if __name__ == "__main__":
    run_service("safety_out", SafetyOutSettings(), setup)
