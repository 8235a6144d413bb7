"""The learner: network, replay, controllers, reward pipeline, and the training step.

``step.train_step`` is the step; ``lobsurf.training`` builds the state and runs the loop.
"""
