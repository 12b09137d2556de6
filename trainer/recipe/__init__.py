"""The training process: the recipe's loop (train), checkpoints, the process it runs in (runtime,
shutdown, torchrun), and the compile trial."""
