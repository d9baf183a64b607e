"""Policy: scheduler, KV block manager, prefix cache and the plain-data step protocol.

Imports no model code and nothing from torch.cuda; tested on CPU with hand-made results."""
