from switchyard.libs.bus import run_service
from switchyard.services.tools.service import setup
from switchyard.services.tools.settings import ToolsSettings

if __name__ == "__main__":
    run_service("tools", ToolsSettings(), setup)
