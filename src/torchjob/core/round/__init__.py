"""One reconcile round, pure: what a runtime observed (`world`, and the `facts` decided on from it) in,
what to do (`reconcile` -> `plan`: actions, events, the new status) and how a job ends (`conditions`)
out. Imports the job model, and the rest of core."""
