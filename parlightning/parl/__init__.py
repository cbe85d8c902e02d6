"""The PARL objective: the shaped reward (`PARLReward`, λ schedules) and critical steps."""
