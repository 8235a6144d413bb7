"""The learner: network, replay, controllers, reward pipeline, and the training step.

``step.train_step`` is the step; ``lobsurf.train`` builds the state and runs the loop.
"""
