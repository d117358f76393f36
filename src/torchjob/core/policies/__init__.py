"""The rules a round applies, one module a policy: restarts, exit codes, backoff and deadlines
(`policy`), Volcano's lifecycle policies (`lifecycle`), a refused pod (`refusals`), Kueue's and the
gang's admission (`admission`), stalls (`stalls`) and warm spares (`spares`). Pure; imports the job
model and `core.shape`."""
