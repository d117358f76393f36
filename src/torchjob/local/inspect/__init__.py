"""What a reader sees of a local job: its record judged by core (`read`), its ranks' stacks taken
(`stacks`) and the dry run's every replica rendered (`render`)."""
