"""``callgate mcp proxy|serve|wrap|trust|pins``: the MCP gateway's commands."""

from __future__ import annotations

import logging
import sys

import click

from callgate._errors import CallgateError
from callgate.cli._common import fail, load_cli_policy, policy_option, preset_option
from callgate.integrations.mcp._pins import PinStore, default_state_dir

_audit_option = click.option("--audit", type=click.Path(dir_okay=False),
                             help="Audit log (default: ~/.local/state/callgate/mcp-audit.db).")
_pins_option = click.option("--pins", type=click.Path(dir_okay=False),
                            help="Pin store (default: the policy's mcp.pins, else "
                                 "~/.local/state/callgate/mcp-pins.db).")


def _stderr_logging(verbose: bool) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if verbose else logging.WARNING,
                        format="callgate: %(message)s")


@click.group("mcp")
def mcp_group() -> None:
    """Put callgate in front of MCP servers: proxy, serve, wrap, trust, pins."""


@mcp_group.command("proxy", context_settings={"ignore_unknown_options": True})
@policy_option
@preset_option
@_audit_option
@_pins_option
@click.option("--name", help="The server's name in policies and the audit log "
                             "(mcp__NAME__TOOL; default: the command's file name; required "
                             "when the command is a launcher such as npx or uvx).")
@click.option("--pass-env", "pass_env", multiple=True, metavar="NAME",
              help="Give the server this variable of the proxy's environment too (repeatable; "
                   "`mcp wrap` adds one for each key of a client entry's env).")
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr what the gateway does.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def proxy_command(policy: str | None, preset: str | None, audit: str | None, pins: str | None,
                  name: str | None, pass_env: tuple[str, ...], verbose: bool,
                  command: tuple[str, ...]) -> None:
    """A stdio MCP server in front of COMMAND (give it after --)."""
    from callgate.integrations.mcp._run import run_proxy
    from callgate.integrations.mcp._wrap import LAUNCHERS, launcher_of
    from callgate.policy._settings import SERVER_NAME

    _stderr_logging(verbose)
    loaded = load_cli_policy(policy, preset)
    if name is None and launcher_of(command[0]) in LAUNCHERS:
        # every npx-started server would otherwise be `npx`: rules written for one server's
        # tools would not meet them, and their pins would collide
        fail(f"{command[0]} starts another program: name the server with --name NAME "
             f"(its tools are mcp__NAME__TOOL in the policy)")
    server = name or _default_name(command[0])
    if not SERVER_NAME.match(server):
        fail(f"server name {server!r}: use letters, digits, '_', '.', '-' "
             f"(no '__', no '_' at the end)")
    for variable in pass_env:
        if not variable or "=" in variable or "\0" in variable:
            fail(f"--pass-env {variable!r}: give a variable's name")
    try:
        sys.exit(run_proxy(loaded, name=server, command=command, audit=audit, pins=pins,
                           pass_env=pass_env))
    except CallgateError as exc:
        fail(f"error: {exc}", 1)


@mcp_group.command("serve")
@click.option("--config", "policy", required=True, type=click.Path(dir_okay=False),
              help="Policy file whose mcp: section names the servers.")
@click.option("--listen", default="127.0.0.1:8808", show_default=True,
              help="HOST:PORT to serve Streamable HTTP on (path /mcp).")
@click.option("--allow-remote", is_flag=True,
              help="Serve on a non-loopback address (the endpoint has no authentication).")
@_audit_option
@_pins_option
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr what the gateway does.")
def serve_command(policy: str, listen: str, allow_remote: bool, audit: str | None,
                  pins: str | None, verbose: bool) -> None:
    """A Streamable HTTP endpoint in front of the servers of a policy's mcp: section."""
    from callgate.integrations.mcp._run import serve_http

    _stderr_logging(verbose)
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"--listen {listen!r}: give HOST:PORT, e.g. 127.0.0.1:8808")
    loaded = load_cli_policy(policy, None)
    try:
        sys.exit(serve_http(loaded, host=host.strip("[]"), port=int(port), audit=audit,
                            pins=pins, allow_remote=allow_remote))
    except CallgateError as exc:
        fail(f"error: {exc}", 1)


@mcp_group.command("wrap")
@click.argument("config", type=click.Path(dir_okay=False, exists=True))
@click.option("--policy", type=click.Path(dir_okay=False, exists=True),
              help="The policy every wrapped server runs under (required unless --undo).")
@_audit_option
@click.option("--undo", is_flag=True, help="Restore every wrapped server.")
def wrap_command(config: str, policy: str | None, audit: str | None, undo: bool) -> None:
    """Rewrite an MCP client configuration so every server runs behind the proxy."""
    from callgate.integrations.mcp._wrap import wrap_config

    if not undo and policy is None:
        fail("give --policy FILE (the policy the wrapped servers run under)")
    try:
        report = wrap_config(config, policy=policy, audit=audit, undo=undo)
    except CallgateError as exc:
        fail(f"error: {exc}", 2)
        return
    verb = "restored" if undo else "wrapped"
    for name in report.wrapped:
        renamed = report.renamed.get(name)
        click.echo(f"{verb}: {name}" + (f" (as server {renamed})" if renamed else ""))
    for name in report.already:
        click.echo(f"unchanged: {name}")
    for name, why in report.skipped:
        click.echo(f"skipped: {name} ({why})")
    click.echo(f"{report.path}: {'rewritten' if report.changed else 'nothing to change'}")


@mcp_group.command("trust")
@click.argument("server")
@click.argument("tool")
@_pins_option
def trust_command(server: str, tool: str, pins: str | None) -> None:
    """Accept the changed (or new) definition of SERVER's TOOL as its pin (TOOL
    ``:instructions`` for the server's instructions)."""
    store = _open_pins(pins)
    try:
        if not store.trust(server, tool):
            fail(f"no changed or new definition of {server}'s tool {tool!r} awaits trust", 1)
        click.echo(f"trusted: {server} {tool}")
    finally:
        store.close()


@mcp_group.command("pins")
@click.argument("server", required=False)
@_pins_option
def pins_command(server: str | None, pins: str | None) -> None:
    """List the pinned tool definitions (and those changed, awaiting trust)."""
    store = _open_pins(pins)
    try:
        for pin in store.pins(server):
            held = "NEW" if not pin.digest else "CHANGED"
            state = f"{held} -> {pin.pending[:12]} (run: callgate mcp trust {pin.server} " \
                    f"{pin.tool})" if pin.pending else "pinned"
            click.echo(f"{pin.server}\t{pin.tool}\t{pin.digest[:12] or '-'}\t{state}")
    finally:
        store.close()


def _open_pins(pins: str | None) -> PinStore:
    try:
        return PinStore(pins or default_state_dir() / "mcp-pins.db")
    except CallgateError as exc:
        fail(f"error: {exc}", 2)
        raise


def _default_name(command: str) -> str:
    import os

    from callgate.integrations.mcp._wrap import server_name

    return server_name(os.path.basename(command))
