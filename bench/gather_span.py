"""Does a small gather's time depend on the table's size or on the span of tables the loop
touches? embedding_bag (sum) of `bags` bags of `bag` random ids, timed from a CUDA graph of one
call per table over `copies` tables in turn (as rooflab's rotation does), per call."""
import torch
import torch.nn.functional as F


def per_call(rows: int, dim: int, bags: int, bag: int, copies: int, reps: int = 20) -> float:
    gen = torch.Generator(device="cuda").manual_seed(rows + copies)
    tables = [torch.empty(rows, dim, device="cuda", dtype=torch.bfloat16).normal_(generator=gen)
              for _ in range(copies)]
    ids = [torch.randint(0, rows, (bags * bag,), device="cuda", generator=gen) for _ in tables]
    offsets = torch.arange(0, bags * bag, bag, device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()  # the side stream must see the tables and ids written
    with torch.cuda.stream(stream):
        for t, i in zip(tables, ids):  # warm up before capture
            F.embedding_bag(i, t, offsets, mode="sum")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [F.embedding_bag(i, t, offsets, mode="sum") for t, i in zip(tables, ids)]
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3 / copies)
    assert all(torch.isfinite(o).all() for o in outs)
    del tables, ids, outs, graph
    torch.cuda.empty_cache()
    return best


if __name__ == "__main__":
    print("rows dim bags bag copies table_MB span_GB per_call_us", flush=True)
    for rows, dim, bags, bag, copies in [
            (960960, 352, 29, 2, 1), (960960, 352, 29, 2, 8), (960960, 352, 29, 2, 24),
            (960960, 352, 29, 2, 48), (330905, 576, 2, 10, 64), (330905, 576, 2, 10, 100),
            (65536, 352, 29, 2, 512), (8192, 352, 29, 2, 1024), (960960, 352, 512, 32, 48)]:
        t = per_call(rows, dim, bags, bag, copies)
        mb = rows * dim * 2 / 2**20
        print(rows, dim, bags, bag, copies, round(mb), round(mb * copies / 1024, 1),
              round(t * 1e6, 2), flush=True)
