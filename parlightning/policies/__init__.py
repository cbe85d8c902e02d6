"""The policies: actor-critic MLP heads with action masks (`actor_critic`), one network shared across subtask slots (`slots`), recurrent (`recurrent`)."""

# the names of the old module `parlightning.policies.actor_critic` (now `parlightning.policies.actor_critic`), so `parlightning.policies.actor_critic.X` still resolves
from parlightning.policies.actor_critic import *  # noqa: F401,F403
