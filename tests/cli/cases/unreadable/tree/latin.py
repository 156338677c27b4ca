import torch

# café au lait
with torch.cuda.stream(s):
    pass
