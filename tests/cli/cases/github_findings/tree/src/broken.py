import torch
with torch.cuda.stream(s)
    pass
