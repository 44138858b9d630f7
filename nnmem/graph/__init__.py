"""Graph mode: record one training step, analyse it, plan its memory, replay it."""
