from libs.bus import run_service
from services.tools.service import setup
from services.tools.settings import ToolsSettings

if __name__ == "__main__":
    run_service("tools", ToolsSettings(), setup)
