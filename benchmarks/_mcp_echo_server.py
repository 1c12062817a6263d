"""A minimal MCP server for the gateway benchmark: one ``echo`` tool, on stdio or, with
``--http PORT``, on Streamable HTTP at ``http://127.0.0.1:PORT/mcp``."""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(name="echo", description="Echo the text.",
                  input_schema={"type": "object", "properties": {"text": {"type": "string"}}})


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[TOOL])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    port = parser.parse_args().http
    server = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)
    if port is None:
        async def serve() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        anyio.run(serve)
        return
    import uvicorn

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
