"""Record properties the broker itself sets or reads, whatever protocol a message came by.

They use RocketMQ's own names (so a RocketMQ tool reading a strata store sees what it
expects): a FIFO message's group, a delay message's delivery time, a transactional message's
mark, and the id a message had while held back.
"""

from __future__ import annotations

PROP_MESSAGE_GROUP = "__SHARDINGKEY"
PROP_DELIVER_MS = "TIMER_DELIVER_MS"    # a delay message's delivery time, ms since the epoch
PROP_TRANSACTION = "TRAN_MSG"           # "true" on a transactional message
PROP_HELD_ID = "__HELD_ID"              # on a message moved out of the held store: its id
