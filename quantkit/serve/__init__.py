"""vLLM as a served subprocess: its knobs (config), its log (log), its lifecycle (server)."""

from .config import KNOBS, ServeConfig, serve_command
from .server import RemoteServer, Server, ServerInfo, VLLMServer, open_server

__all__ = ["KNOBS", "RemoteServer", "ServeConfig", "Server", "ServerInfo", "VLLMServer", "open_server", "serve_command"]
