"""A local MCP server (stdio) with the adapters' tools: ``fetch_page`` gives a page with a
prompt injection, ``read_notes`` the user's notes, ``send_email`` appends what it would send to
the file named by ``--outbox``, so a test can tell what reached the server."""

from __future__ import annotations

import argparse
import json

from mcp.server.mcpserver import MCPServer

parser = argparse.ArgumentParser()
parser.add_argument("--outbox", required=True)
parser.add_argument("--page", required=True)
parser.add_argument("--notes", required=True)
opts = parser.parse_args()

server = MCPServer("mail")


@server.tool()
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    return str(opts.page)


@server.tool()
def read_notes() -> str:
    """Read the user's notes."""
    return str(opts.notes)


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an e-mail."""
    with open(opts.outbox, "a") as outbox:
        outbox.write(json.dumps({"to": to, "body": body}) + "\n")
    return f"sent to {to}"


if __name__ == "__main__":
    server.run()
