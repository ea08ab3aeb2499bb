"""Every rank says where it is; rank 0 writes world size and hosts to argv[1] (gloo, CPU)."""
import json
import os
import socket
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
hosts = [None] * dist.get_world_size()
dist.all_gather_object(hosts, socket.gethostname())
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump({"world_size": dist.get_world_size(), "hosts": hosts}, fh)
dist.destroy_process_group()
