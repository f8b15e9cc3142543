"""The step (DESIGN §9): the trainer and its stages as data, agents stepped together (lockstep,
pack) and the helper pools of a pack's host work."""
