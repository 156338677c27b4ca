import torch.cuda as tc


def step(model, batch, side):
    out = model(batch)
    side.wait_stream(tc.current_stream())
    with tc.stream(side):
        loss = out.sum()
    tc.current_stream().wait_stream(side)
    loss.record_stream(tc.current_stream())
    return loss
