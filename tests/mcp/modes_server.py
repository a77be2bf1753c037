"""A real stdio MCP server (the SDK's server API) that sets file modes, for the tests.

`python modes_server.py`. Its one tool, `set_mode`, makes a file in the server's own
/tmp and chmods it, answering with the mode the file then has or the error: a setuid
bit must be refused by the sandbox's seccomp filter (EPERM), a plain mode allowed.
"""

from __future__ import annotations

import os
import stat
import tempfile

from mcp.server.mcpserver import MCPServer

server = MCPServer("modes", version="1.0", log_level="WARNING")


@server.tool()
def set_mode(mode: int) -> str:
    """Make a file and chmod it to `mode`; its mode after, or the error."""
    fd, path = tempfile.mkstemp()
    os.close(fd)
    try:
        os.chmod(path, mode)
    except OSError as exc:
        return f"refused: errno {exc.errno}"
    return f"mode {stat.S_IMODE(os.stat(path).st_mode):o}"


if __name__ == "__main__":
    server.run()
