"""What a replica is started with on this machine: its launch spec (`launch`), the job's ports and
files before the supervisor runs (`prepare`), torchrun with its store on loopback
(`loopback_torchrun`), pod volumes as directories (`volumes`) and T9k's TensorBoard (`tensorboard`)."""
