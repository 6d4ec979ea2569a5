"""vLLM as a served subprocess: its knobs (config), its log (log), its lifecycle (server).

Only the knobs are imported here (the command line builds its flags from them); the server's
names come from `quantkit.serve.server`."""

from .config import KNOBS, ServeConfig, serve_command

__all__ = ["KNOBS", "ServeConfig", "serve_command"]
