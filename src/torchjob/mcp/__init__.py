"""The agents' face (`torchjob mcp`): a Model Context Protocol server whose tools are the verbs of the
runtime interface, over `torchjob.connect` as cli/, sdk/ and ui/ are. `tools` holds the verbs as plain
functions (no MCP in them: the answers and the mistakes, as data); `server` puts them on the official
Python SDK (`mcp`, the `torchjob[mcp]` extra) over stdio or streamable HTTP; `command` is the click
command cli/main.py registers, light (click only) so that the rest of the command line stays fast."""
