"""The search: a candidate's evaluation (count, time, train rung by rung, validate), the rung
ladder and its successive-halving rule, proposals (samplers behind the counted-limit guard),
the study's setup and the budget loop, the live view of a running study, the worker pool that
serves many studies, and `eas verify`."""
