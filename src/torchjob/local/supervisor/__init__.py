"""The loop that runs one local job: the supervisor (observe -> core -> apply -> record), each replica
attempt as a process group (`process`), signals that reach only the process meant (`pids`), the
watchdog that outlives a killed supervisor, the detached daemon behind `torchjob submit`, the sweep of
strays, the console's quiet lines and the job's progress endpoint."""
