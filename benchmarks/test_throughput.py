"""Throughput (launches/s with 1, 2, 4 threads) and 5,000 back-to-back launches
with a network namespace (namespace teardown is asynchronous and can pile up)."""

import statistics

import pytest

import measure as M

PER_THREAD = 40
SOAK = 5000
CHUNK = 1000


@pytest.mark.parametrize("threads", (1, 2, 4))
@pytest.mark.parametrize("name", ("plain", "native", "bwrap-backend", "bwrap"))
def test_threads(benchmark, make_contender, name, threads):
    contender = make_contender(name, "deny" if name != "plain" else "allow")
    benchmark.group = f"throughput-{threads}-threads"
    rates = []

    def batch():
        rates.append(M.threaded_rate(contender.launch, threads, PER_THREAD))
    benchmark.pedantic(batch, rounds=3, warmup_rounds=0)
    benchmark.extra_info["launches_per_s"] = round(statistics.median(rates), 1)


def test_soak_native_netns(benchmark, make_contender):
    contender = make_contender("native", "deny")
    benchmark.group = "soak"
    result = {}

    def soak():
        for _ in range(50):
            contender.launch()
        rss0 = M.rss_kib()
        samples = M.back_to_back(contender.launch, SOAK)
        result["rss_growth_kib_per_1000"] = (M.rss_kib() - rss0) / (SOAK / 1000)
        result["samples"] = list(samples)
    benchmark.pedantic(soak, rounds=1, iterations=1)
    samples = result.pop("samples")
    p50 = statistics.median(samples)
    benchmark.extra_info.update(
        result, p50_ms=p50 * 1e3, p99_ms=M.percentile(samples, 99) * 1e3,
        p99_over_p50=M.percentile(samples, 99) / p50,
        last_over_first=statistics.median(samples[-CHUNK:]) / statistics.median(samples[:CHUNK]))
