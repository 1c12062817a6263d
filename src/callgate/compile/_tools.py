"""The tools file ``callgate compile --tools`` reads: the tools' names and input schemas.

Three shapes are read, in JSON or YAML: MCP's ``tools/list`` result (``{"tools": [{name,
inputSchema, …}]}``), a bare list of such tools (Anthropic's ``input_schema`` spelling too),
and OpenAI function definitions (``{"type": "function", "function": {name, parameters}}``).
The file is read by the policy loader's rules (``validate_document``): a key a tool entry does
not have, a value of the wrong type, a name given twice, nesting deeper than
``MAX_TOOLS_DEPTH`` or a file that is not UTF-8 is an error at its file:line:col. Inside an
input schema only ``properties`` (each an object) and their ``enum``/``const`` are read; the
rest of JSON Schema is left as written.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from callgate._errors import PolicyError, Problem
from callgate._text import NotUtf8Error, decode_utf8

__all__ = ["MAX_TOOLS_BYTES", "MAX_TOOLS_DEPTH", "DeclaredTool", "read_tools"]

#: Largest tools file read.
MAX_TOOLS_BYTES = 4 * 1024 * 1024
#: Deepest nesting of a tools file (JSON Schema nests, but not this far).
MAX_TOOLS_DEPTH = 32


class _Property(BaseModel):
    """One argument's schema: only ``enum`` and ``const`` are read."""

    model_config = ConfigDict(extra="allow")

    enum: list[Any] | None = None
    const: Any = None


class _InputSchema(BaseModel):
    model_config = ConfigDict(extra="allow")

    properties: dict[str, _Property] = Field(default_factory=dict)


class _Tool(BaseModel):
    """An MCP tool (or Anthropic's spelling of one)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=256)
    title: str | None = None
    description: str | None = None
    input_schema: _InputSchema = Field(default_factory=_InputSchema, alias="inputSchema")
    output_schema: dict[str, Any] | None = Field(default=None, alias="outputSchema")
    annotations: dict[str, Any] | None = None
    icons: list[Any] | None = None
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    cache_control: dict[str, Any] | None = None  # Anthropic's prompt caching marker
    type: Literal["custom"] | None = None  # Anthropic's custom tool type

    @model_validator(mode="before")
    @classmethod
    def _one_schema_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict) and "input_schema" in data:
            if "inputSchema" in data:
                raise ValueError("give inputSchema or input_schema, not both")
            data = {("inputSchema" if k == "input_schema" else k): v for k, v in data.items()}
        return data


class _Function(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: _InputSchema = Field(default_factory=_InputSchema)
    strict: bool | None = None


class _FunctionTool(BaseModel):
    """An OpenAI function definition."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: _Function


def _shape(entry: Any) -> str:
    return "function" if isinstance(entry, dict) and "function" in entry else "tool"


_Entry = Annotated[Annotated[_FunctionTool, Tag("function")] | Annotated[_Tool, Tag("tool")],
                   Discriminator(_shape)]


class _ToolsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tools: list[_Entry]
    next_cursor: str | None = Field(default=None, alias="nextCursor")
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class DeclaredTool(BaseModel):
    """A tool as Σ needs it: its name, first line of description, and per argument the values
    its schema allows (None: any value)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    values: dict[str, tuple[Any, ...] | None]


def read_tools(path: str | os.PathLike[str]) -> list[DeclaredTool]:
    """The tools a file declares; ``PolicyError`` names each problem at file:line:col."""
    from callgate.policy._loader import validate_document

    where = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TOOLS_BYTES + 1)
    except OSError as exc:
        raise PolicyError([Problem(f"cannot read the tools file: {exc.strerror or exc}",
                                   where)]) from exc
    if len(data) > MAX_TOOLS_BYTES:
        raise PolicyError([Problem(f"a tools file is at most {MAX_TOOLS_BYTES} bytes", where)])
    try:
        text = decode_utf8(data)
    except NotUtf8Error as exc:
        raise PolicyError([Problem("not valid UTF-8", where, exc.line, exc.column)]) from exc
    document, places = validate_document(text, where, _ToolsFile, max_depth=MAX_TOOLS_DEPTH,
                                         list_key="tools")
    seen: dict[str, int] = {}
    problems: list[Problem] = []
    tools: list[DeclaredTool] = []
    for index, entry in enumerate(document.tools):
        tool = entry.function if isinstance(entry, _FunctionTool) else entry
        schema = tool.parameters if isinstance(tool, _Function) else tool.input_schema
        if tool.name in seen:
            line, column = places[("tools", index)][:2]
            problems.append(Problem(f"tool {tool.name!r} is declared twice (also tools"
                                    f"[{seen[tool.name]}])", where, line, column))
            continue
        seen[tool.name] = index
        described = (tool.description or "").strip()
        tools.append(DeclaredTool(
            name=tool.name, description=described.splitlines()[0] if described else "",
            values={name: _allowed(prop) for name, prop in schema.properties.items()}))
    if problems:
        raise PolicyError(problems)
    return tools


def _allowed(prop: _Property) -> tuple[Any, ...] | None:
    """The values a property's schema allows when it lists them all in scalars, else None."""
    if "const" in prop.model_fields_set:
        listed: list[Any] = [prop.const]
    elif prop.enum is not None:
        listed = prop.enum
    else:
        return None
    if not all(v is None or isinstance(v, str | int | float | bool) for v in listed):
        return None  # an object or list among them: no statement literal names those
    return tuple(listed)
