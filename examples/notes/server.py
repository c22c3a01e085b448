"""A notes server (the official MCP Python SDK's FastMCP), the local stdio server of
`examples/notes/`: it reads the notes in the directory it is given and saves drafts
into its working directory (the per-run workspace Knox gives it).

    python server.py NOTES_DIR
"""

import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

NOTES = Path(sys.argv[1])
mcp = FastMCP("notes")


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def list_notes() -> list[str]:
    """The names of the notes."""
    return sorted(p.stem for p in NOTES.glob("*.txt"))


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def read_note(name: str) -> str:
    """One note's text."""
    if "/" in name or name.startswith("."):
        raise ValueError("a note's name, not a path")
    return (NOTES / f"{name}.txt").read_text()


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
def save_draft(name: str, text: str) -> str:
    """Saves a draft (into the working directory)."""
    if "/" in name or name.startswith("."):
        raise ValueError("a draft's name, not a path")
    Path(f"{name}.md").write_text(text)
    return f"saved {name}.md"


mcp.run()
