"""The web dashboard (`torchjob ui`): a face over the runtime interface, like cli/. Imported only
by the `ui` command, so that the rest of the command line stays light."""
