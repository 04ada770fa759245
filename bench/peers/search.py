"""search: cohort's two search workloads through Optuna and Ray Tune, the training loops in
PyTorch 2.x (one thread per trial). Run it in scripts/pyenv peers.

  --workload sweep  bench/sweep's tiny models: an 8-8-2 MLP (ReLU, softmax) on the 410 rows of
                    bench/out/sweep.csv (bench/sweep writes it), validation split 0.2, batch 32,
                    2 epochs, Adam with lr log-uniform in [1e-4, 1e-1]; --trials of them (1000),
                    drawn at random (Optuna's RandomSampler, Ray Tune's default search), none
                    stopped early: what each trial costs besides its training.
  --workload asha   bench/asha.yaml: 27 draws of lr log-uniform [1e-4, 3e-2], units 64/128/256,
                    dropout uniform [0, 0.5], batch 64/128/256 of Dense(units, relu), Dropout,
                    Dense(10, softmax) on Fashion-MNIST (the last 20% of train for validation,
                    a fresh shuffle each epoch), up to 9 epochs, successive halving on
                    val_accuracy with grace 1 and reduction factor 3: Ray Tune's ASHAScheduler
                    (2 trials at once, one per core) and Optuna's SuccessiveHalvingPruner (one
                    trial at a time, torch on every core).

--tool optuna|ray. Prints one JSON object: wall seconds (the tool's start included), the seconds
spent inside the trials' training, per-trial figures, the epochs trained, the best trial's
validation accuracy and, for asha, its test accuracy (on the weights its trial ended with)."""
import argparse
import json
import os
import sys
import time

import numpy as np

import fmnist  # bench/peers/fmnist.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(workload):
    """(x_train, y_train, x_val, y_val, x_test, y_test) as numpy arrays (test None for sweep)."""
    if workload == "sweep":
        a = np.loadtxt(os.path.join(ROOT, "bench/out/sweep.csv"), delimiter=",", dtype=np.float32)
        x, y = a[:, :-1], a[:, -1].astype(np.int64)
        cut = x.shape[0] - int(round(x.shape[0] * 0.2))
        return x[:cut], y[:cut], x[cut:], y[cut:], None, None
    x, y = fmnist.load("train")
    xt, yt = fmnist.load("t10k")
    x, xt = x.reshape(-1, 784), xt.reshape(-1, 784)
    return x[:48000], y[:48000], x[48000:], y[48000:], xt, yt


class Trainer:
    """One trial's model in torch: Dense(units, relu), Dropout, Dense(classes); Adam (Keras's
    epsilon); epoch() trains one shuffled epoch and returns the validation accuracy."""

    def __init__(self, data, cfg, seed):
        import torch
        import torch.nn as nn
        self.torch = torch
        torch.set_num_threads(cfg.get("threads", 1))
        torch.manual_seed(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.x, self.y, self.xv, self.yv, self.xt, self.yt = (
            None if a is None else torch.from_numpy(a) for a in data)
        classes = int(self.y.max()) + 1
        self.model = nn.Sequential(nn.Linear(self.x.shape[1], cfg["units"]), nn.ReLU(),
                                   nn.Dropout(cfg.get("dropout", 0.0)),
                                   nn.Linear(cfg["units"], classes))
        for m in self.model:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg["lr"], eps=1e-7)
        self.batch = cfg["batch"]
        self.loss = nn.CrossEntropyLoss()

    def accuracy(self, x, y):
        with self.torch.no_grad():
            self.model.eval()
            return float((self.model(x).argmax(1) == y).float().mean())

    def epoch(self):
        t = self.torch
        self.model.train()
        perm = t.randperm(self.x.shape[0], generator=self.gen)
        for i in range(0, self.x.shape[0], self.batch):
            idx = perm[i:i + self.batch]
            loss = self.loss(self.model(self.x[idx]), self.y[idx])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        return self.accuracy(self.xv, self.yv)


def space(workload, trial=None):
    """A draw of the workload's space through an Optuna trial, or Ray Tune's param_space."""
    if trial is not None:
        if workload == "sweep":
            return {"lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True), "units": 8, "batch": 32}
        return {"lr": trial.suggest_float("lr", 1e-4, 3e-2, log=True),
                "units": trial.suggest_categorical("units", [64, 128, 256]),
                "dropout": trial.suggest_float("dropout", 0.0, 0.5),
                "batch": trial.suggest_categorical("batch", [64, 128, 256])}
    from ray import tune
    if workload == "sweep":
        return {"lr": tune.loguniform(1e-4, 1e-1), "units": 8, "batch": 32}
    return {"lr": tune.loguniform(1e-4, 3e-2), "units": tune.choice([64, 128, 256]),
            "dropout": tune.uniform(0.0, 0.5), "batch": tune.choice([64, 128, 256])}


def run_optuna(args, data, epochs):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
              if args.workload == "asha" else optuna.pruners.NopPruner())
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=7),
                                pruner=pruner)
    inside, inside_cpu, trained, tests = [0.0], [0.0], [0], {}

    def objective(trial):
        cfg = space(args.workload, trial)
        cfg["threads"] = args.threads
        t0, c0 = time.perf_counter(), time.process_time()
        tr = Trainer(data, cfg, seed=trial.number)
        acc = best = 0.0
        try:
            for e in range(epochs):
                acc = tr.epoch()
                trained[0] += 1
                best = max(best, acc)
                trial.report(acc, e + 1)
                if trial.should_prune():
                    raise optuna.TrialPruned()
            if tr.xt is not None:
                tests[trial.number] = tr.accuracy(tr.xt, tr.yt)
        finally:
            inside[0] += time.perf_counter() - t0
            inside_cpu[0] += time.process_time() - c0
        return best

    study.optimize(objective, n_trials=args.trials)
    done = [t for t in study.trials if t.value is not None]
    best = max(done, key=lambda t: t.value)
    return {"inside_seconds": inside[0], "inside_cpu_seconds": inside_cpu[0],
            "epochs_trained": trained[0], "best_val_accuracy": best.value,
            "best_params": best.params, "best_test_accuracy": tests.get(best.number),
            "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
            "optuna": optuna.__version__}


def run_ray(args, data, epochs):
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    t0 = time.perf_counter()
    ray.init(num_cpus=args.cores, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    init_s = time.perf_counter() - t0
    data_ref = ray.put(data)

    def trainable(cfg):
        t1, c1 = time.perf_counter(), time.process_time()
        tr = Trainer(ray.get(data_ref), dict(cfg, threads=1), seed=int(cfg["lr"] * 1e9) % 100000)
        best = 0.0
        for e in range(epochs):
            acc = tr.epoch()
            best = max(best, acc)
            rep = {"val_accuracy": acc, "best": best, "inside": time.perf_counter() - t1,
                   "inside_cpu": time.process_time() - c1}
            if e == epochs - 1 and tr.xt is not None:
                rep["test_accuracy"] = tr.accuracy(tr.xt, tr.yt)
            tune.report(rep)

    sched = (ASHAScheduler(time_attr="training_iteration", max_t=epochs, grace_period=1,
                           reduction_factor=3) if args.workload == "asha" else FIFOScheduler())
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space=space(args.workload),
        tune_config=tune.TuneConfig(num_samples=args.trials, metric="val_accuracy", mode="max",
                                    scheduler=sched, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=os.path.join(ROOT, "bench/out/ray"),
                                  name=f"{args.workload}-{args.trials}", verbose=0))
    res = tuner.fit()
    df = res.get_dataframe()
    trained = int(df["training_iteration"].sum())
    best = res.get_best_result(metric="best", mode="max", scope="all")
    out = {"ray_init_seconds": init_s, "inside_seconds": float(df["inside"].sum()),
           "inside_cpu_seconds": float(df["inside_cpu"].sum()),
           "epochs_trained": trained, "best_val_accuracy": float(best.metrics["best"]),
           "best_params": {k: v for k, v in best.config.items()},
           "best_test_accuracy": best.metrics.get("test_accuracy"),
           "pruned": int((df["training_iteration"] < epochs).sum()), "ray": ray.__version__}
    ray.shutdown()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("sweep", "asha"), required=True)
    ap.add_argument("--tool", choices=("optuna", "ray"), required=True)
    ap.add_argument("--trials", type=int)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--threads", type=int, default=0, help="Optuna's torch threads (0: the cores)")
    args = ap.parse_args()
    args.trials = args.trials or (1000 if args.workload == "sweep" else 27)
    args.threads = args.threads or (1 if args.workload == "sweep" else args.cores)
    epochs = 2 if args.workload == "sweep" else 9
    t0 = time.perf_counter()
    data = load(args.workload)
    r = (run_optuna if args.tool == "optuna" else run_ray)(args, data, epochs)
    wall = time.perf_counter() - t0
    import torch
    r.update({"workload": args.workload, "tool": args.tool, "trials": args.trials, "epochs": epochs,
              "wall_seconds_inside": wall, "per_trial_ms": 1000 * wall / args.trials,
              "inside_per_trial_ms": 1000 * r["inside_seconds"] / args.trials,
              "inside_cpu_per_trial_ms": 1000 * r["inside_cpu_seconds"] / args.trials,
              "torch": torch.__version__})
    json.dump(r, sys.stdout, default=str)
    print()


if __name__ == "__main__":
    main()
