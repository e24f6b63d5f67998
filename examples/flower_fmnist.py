"""A design applied in Flower, beside paretofl's own trainer on the same design.

    python examples/flower_fmnist.py --clients 100 --epsilon 2 --seeds 3

1. `paretofl.design(..., framework="flower")`: the (q, T, σ) for Flower's
   sampling (m of N clients without replacement) and this budget;
2. a Flower simulation (its Ray simulation engine, `flwr[simulation]`) with
   the strategy `paretofl.integrations.flower.strategy` builds: equal-weight
   FedAvg in Flower's server-side fixed-clipping DP wrapper; the clients
   train the model on their IID share of FashionMNIST in plain PyTorch (one
   local epoch of SGD, batch 64), the server evaluates on the test set
   after each round;
3. paretofl's trainer on the same (q, T, σ, C), the same clients' data and
   the same model: one factory runs in both (``--model``: logistic
   regression by default, or your ``package.module:function`` factory,
   ``factory(in_shape, n_classes) -> nn.Module``).

It prints one line per run and a table of test accuracy and loss (mean and
spread over seeds) with each side's ε.  `--out FILE.json` keeps the rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import time
import warnings

import numpy as np
import torch
from torch import nn

import paretofl
from paretofl.fl.data import load_dataset, make_partition
from paretofl.integrations import flower as bridge


def lr(in_shape, n_classes):
    """Logistic regression, as a factory (the default model)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), n_classes))


def _factory(model):
    if model == "lr":
        return lr
    from paretofl.fl.modules import resolve

    return resolve(model, "model factory")


@functools.lru_cache(maxsize=2)
def _data(dataset):
    """The data set, loaded once per process (each of Ray's client actors
    loads it itself: nothing large travels with the app)."""
    ds = load_dataset(dataset)
    return ds.x_train, ds.y_train, ds.x_test, ds.y_test


@functools.lru_cache(maxsize=4)
def _parts(dataset, clients, seed):
    return make_partition("iid", _data(dataset)[1].numpy(), clients, seed=seed)


def simulate(plan: bridge.FlowerPlan, dataset="fashion-mnist", clients=100, seed=0, lr=0.1, local_epochs=1,
             batch_size=64, zero_updates=False, quiet=True, model="lr") -> dict:
    """One Flower simulation of ``plan``.  Returns the final test accuracy and
    loss and the global parameters after every round.  ``zero_updates``:
    clients send back (nearly) what they received, so the rounds' changes are
    Flower's DP noise alone (Flower's clipping divides by the update's norm,
    so the update is 1e-6, not 0)."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.simulation import run_simulation

    if quiet:   # Flower logs its deprecation notices as warnings: this example shows only errors
        logging.getLogger("flwr").setLevel(logging.ERROR)
    x_tr, y_tr, x_te, y_te = _data(dataset)
    shape, n_cls = tuple(x_tr.shape[1:]), int(y_tr.max()) + 1
    factory = _factory(model)
    history, metrics = [], []

    def model_from(params):
        m = factory(shape, n_cls)
        with torch.no_grad():
            for p, v in zip(m.parameters(), params):
                p.copy_(torch.as_tensor(v))
        return m

    class Client(NumPyClient):
        def __init__(self, cid):
            self.cid = cid

        def fit(self, parameters, config):
            if zero_updates:
                out = [p.copy() for p in parameters]
                out[1][0] += 1e-6
                return out, 1, {}
            torch.set_num_threads(1)      # one client per actor, one core each
            xs, ys, _, _ = _data(dataset)
            idx = torch.as_tensor(_parts(dataset, clients, seed)[self.cid])
            g = torch.Generator().manual_seed(seed * 100_003 + self.cid * 7919 + int(config.get("round", 0)))
            m = model_from(parameters)
            opt = torch.optim.SGD(m.parameters(), lr=lr)
            for _ in range(local_epochs):
                order = idx[torch.randperm(len(idx), generator=g)]
                for s in range(0, len(order), batch_size):
                    b = order[s:s + batch_size]
                    opt.zero_grad()
                    nn.functional.cross_entropy(m(xs[b]), ys[b]).backward()
                    opt.step()
            return [p.detach().numpy().copy() for p in m.parameters()], len(idx), {}

    def client_fn(context: Context):
        return Client(int(context.node_config["partition-id"])).to_client()

    def evaluate(rnd, params, config):
        history.append([p.copy() for p in params])
        with torch.no_grad():
            logits = model_from(params)(x_te)
            loss = float(nn.functional.cross_entropy(logits, y_te))
            acc = float((logits.argmax(1) == y_te).float().mean())
        metrics.append((rnd, loss, acc))
        return loss, {"accuracy": acc}

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        init = [p.detach().numpy().copy() for p in factory(shape, n_cls).parameters()]

    def server_fn(context):
        np.random.seed(seed)   # Flower's DP noise is drawn from numpy's global generator
        s = bridge.strategy(plan, evaluate_fn=evaluate, initial_parameters=ndarrays_to_parameters(init),
                            on_fit_config_fn=lambda rnd: {"round": rnd})
        return ServerAppComponents(strategy=s, config=ServerConfig(num_rounds=plan.num_rounds))

    t = time.perf_counter()
    saved = os.environ.get("PYTHONPATH")
    try:
        with warnings.catch_warnings():   # Flower's and Ray's deprecation and future warnings stay quiet here
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            run_simulation(ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn), num_supernodes=clients,
                           backend_config={"client_resources": {"num_cpus": 1},
                                           "init_args": {"include_dashboard": False, "log_to_driver": False,
                                                         "logging_level": logging.ERROR}})
    finally:   # Ray's start sets PYTHONPATH for this process's children: put it back
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    rnd, loss, acc = metrics[-1]
    return {"accuracy": acc, "test_loss": loss, "rounds": rnd, "params": history,
            "seconds": time.perf_counter() - t}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=100, help="clients N (default %(default)s)")
    ap.add_argument("--epsilon", type=float, default=2.0, help="the privacy budget (default %(default)s)")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta of (epsilon, delta) (default %(default)s)")
    ap.add_argument("--max-rounds", type=int, default=200, help="most rounds the design may use (default %(default)s)")
    ap.add_argument("--clip", type=float, default=0.3, help="clipping norm C (default %(default)s)")
    ap.add_argument("--lr", type=float, default=0.1, help="clients' learning rate (default %(default)s)")
    ap.add_argument("--seeds", type=int, default=3, help="runs of each side (default %(default)s)")
    ap.add_argument("--dataset", default="fashion-mnist",
                    help="a built-in data set or your loader package.module:function (default %(default)s)")
    ap.add_argument("--model", default="lr",
                    help="lr, or your factory package.module:function, run by both sides (default %(default)s)")
    ap.add_argument("--out", help="write the rows as JSON here")
    a = ap.parse_args()

    d = paretofl.design(n_clients=a.clients, epsilon=a.epsilon, delta=a.delta, max_rounds=a.max_rounds,
                        framework="flower")
    plan = bridge.plan(d, a.clip)
    print(f"design for Flower: q {d.q:g} (m = {plan.num_sampled_clients}), T {d.rounds}, sigma {d.sigma:.4g}, "
          f"noise multiplier {plan.noise_multiplier:.4g}, epsilon {d.epsilon:.4f}", flush=True)
    # run through this file imported as a module, so that Ray's workers import
    # its functions by name instead of receiving copies (with the data) by value
    import flower_fmnist as this

    rows = []
    for seed in range(a.seeds):
        f = this.simulate(plan, dataset=a.dataset, clients=a.clients, seed=seed, lr=a.lr, model=a.model)
        rows.append({"runner": "flower", "seed": seed, "accuracy": f["accuracy"], "test_loss": f["test_loss"],
                     "epsilon": bridge.flower_epsilon(a.clients, plan.num_sampled_clients, plan.noise_multiplier,
                                                      f["rounds"], a.delta), "seconds": f["seconds"]})
        print(rows[-1], flush=True)
    t = time.perf_counter()
    # "lr": paretofl's built-in LR (hand-written kernels; the same model as the factory, tested)
    model = "lr" if a.model == "lr" else this._factory(a.model)
    r = paretofl.train(algorithm="dpfedavg", dataset=a.dataset, model=model, clients=a.clients,
                       epsilon=a.epsilon, delta=a.delta, rounds=d.rounds, replicas=a.seeds,
                       mechanism="client-aggregate", client_rate=d.q, sigma=d.sigma, clip=a.clip, lr=a.lr,
                       local_epochs=1, batch_size=64)
    for seed in range(a.seeds):
        rows.append({"runner": "paretofl", "seed": seed, "accuracy": r.per_replica["accuracy"][seed],
                     "test_loss": r.per_replica["test_loss"][seed], "epsilon": r.per_replica["epsilon"][seed],
                     "seconds": (time.perf_counter() - t) / a.seeds})
        print(rows[-1], flush=True)
    print("\n| runner | test accuracy (mean ± sd) | test loss | epsilon | seconds a run |\n|---|---|---|---|---|")
    for who in ("flower", "paretofl"):
        rr = [x for x in rows if x["runner"] == who]
        acc, loss = np.array([x["accuracy"] for x in rr]), np.array([x["test_loss"] for x in rr])
        print(f"| {who} | {100 * acc.mean():.1f} ± {100 * acc.std():.1f} % | {loss.mean():.4f} ± {loss.std():.4f} "
              f"| {max(x['epsilon'] for x in rr):.3f} | {np.mean([x['seconds'] for x in rr]):.1f} |")
    print("\nwhy the two epsilons differ on the same q, T and sigma: Flower draws m of N clients without "
          "replacement, and its neighbouring data sets differ by one client replaced by another (sensitivity "
          "2C), so the design for Flower spends the whole budget there; paretofl's trainer samples each client "
          "with probability q and its neighbours add or remove one client (sensitivity C), which the same noise "
          "protects better. Each epsilon is exact for its own relation; they are not two measurements of one "
          "thing (docs/theory.md section 5).")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"design": {k: v for k, v in d.to_dict().items() if k != "notes"}, "plan": plan.to_dict(),
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
