"""Run in .venv-streaming (scripts/setup_oracles.sh): mosaicml-streaming's StreamingDataset reads an MDS
folder in order; prints every sample's tokens as a JSON list of lists."""

import json
import sys
import tempfile
import types

# The package's __init__ imports its vision and multimodal dataset wrappers, and through them torchvision, whose
# wheel here (built for CUDA torch) does not load beside the CPU torch. The reader is streaming.base's
# StreamingDataset, untouched; only those wrappers are left out.
for name in ("streaming.vision", "streaming.multimodal"):
    sys.modules[name] = types.ModuleType(name)

from streaming import StreamingDataset  # noqa: E402

with tempfile.TemporaryDirectory() as cache:
    ds = StreamingDataset(local=sys.argv[1], shuffle=False, batch_size=1)
    json.dump([ds[i]["tokens"].tolist() for i in range(len(ds))], sys.stdout)
    print(sys.argv[1], ds[0]["tokens"].dtype, file=sys.stderr)
