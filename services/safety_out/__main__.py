from libs.bus import run_service
from services.safety_out.service import setup
from services.safety_out.settings import SafetyOutSettings

if __name__ == "__main__":
    run_service("safety_out", SafetyOutSettings(), setup)
