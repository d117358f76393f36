"""Reading what a rank said, pure: torch's error file (`torch_errors`), which rank of a replica failed
and its own words (`rank_errors`), a Python traceback in its output (`tracebacks`) and its stacks
grouped (`stacks`). Text in, findings out; imports nothing else of core."""
