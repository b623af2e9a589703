"""Training a network: the one training step and schedule (step), proxy training at a search
fidelity (proxy), `eas train`'s full training of an export (full) with its checkpoints,
distributed launch and process group, and the green report of what the training cost."""
