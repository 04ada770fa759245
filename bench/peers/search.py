"""search: cohort's two search workloads through Optuna and Ray Tune on the configurations
cohort drew, the training loops in PyTorch 2.x. Run it in scripts/pyenv peers.

  --configs FILE    a JSON list of the models to train, in cohort's plan order: each
                    {"name", "lr", "units", "dropout", "batch", "seed"} (bench/peers/run writes
                    it from `cohort plan PLAN --json`). Both tools train exactly these, in this
                    order: Optuna through study.enqueue_trial (its sampler draws nothing), Ray
                    Tune through a grid over their indices. --trials N takes the first N.
  --workload sweep  bench/sweep's tiny models: an 8-8-2 MLP (ReLU, softmax) on the 410 rows of
                    bench/out/sweep.csv, validation split 0.2 (the last rows), 2 epochs, none
                    stopped early: what each trial costs besides its training.
  --workload asha   bench/asha.yaml: Dense(units, relu), Dropout, Dense(10, softmax) on
                    Fashion-MNIST (the last 20% of train for validation, a fresh shuffle each
                    epoch), up to 9 epochs, successive halving on val_accuracy with grace 1 and
                    reduction factor 3: Ray Tune's ASHAScheduler (a trial a core at once) and
                    Optuna's SuccessiveHalvingPruner (one trial at a time, torch on --threads).

Each trial seeds torch with its configuration's seed (cohort's), so a configuration trained on
one thread gives the same per-epoch accuracies under either tool: their results differ only by
which trials their schedulers let through. An epoch is one pass over the training rows and the
validation pass; the epochs trained are counted in the trials (a trial stopped at a rung
counts the epochs it trained). The time inside a trial's training is measured around its
epochs only (the training steps and the validation pass, as cohort's history times an epoch;
not the model's construction, nor the tool's report or pruning calls), as the thread's CPU time
where torch runs on one thread (the trial's own work, whatever else its process runs) and as
wall time.

--tool optuna|ray. Prints one JSON object: wall seconds (the tool's start included), the
seconds inside the trials' training, the epochs trained, every trial's validation accuracies by
epoch, the best validation accuracy over every trial and epoch, and for asha the test accuracy
of that trial's final weights where it trained all its epochs."""
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


class Clock:
    """The seconds inside the trials' training: wall, and CPU (the thread's where torch runs on
    one thread, else the process's)."""

    def __init__(self, threads):
        self.cpu_clock = time.thread_time if threads == 1 else time.process_time
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), self.cpu_clock()
        return self

    def __exit__(self, *exc):
        self.wall += time.perf_counter() - self.w0
        self.cpu += self.cpu_clock() - self.c0
        return False


def read_configs(path, trials):
    with open(path) as f:
        configs = json.load(f)
    for i, c in enumerate(configs):
        missing = {"name", "lr", "units", "dropout", "batch", "seed"} - set(c)
        if missing:
            sys.exit(f"search.py: {path}: configuration {i} lacks {', '.join(sorted(missing))}")
    if trials > len(configs):
        sys.exit(f"search.py: --trials {trials}, but {path} holds {len(configs)} configurations")
    return configs[:trials]


def summary(configs, curves, tests, epochs):
    """The figures both tools print, from each trial's validation accuracies by epoch."""
    best_i = max(curves, key=lambda i: (max(curves[i]), -i))
    return {"epochs_trained": sum(len(c) for c in curves.values()),
            "pruned": sum(len(c) < epochs for c in curves.values()),
            "best_val_accuracy": max(curves[best_i]), "best_name": configs[best_i]["name"],
            "best_params": configs[best_i], "best_epochs": len(curves[best_i]),
            "best_test_accuracy": tests.get(best_i),
            "curves": {configs[i]["name"]: curves[i] for i in sorted(curves)}}


def descendants_cpu():
    """{pid: (name, CPU seconds)} of this process's living descendants (Ray Tune's daemons and
    workers), each with its reaped children's, from /proc: what they have spent by now."""
    tck, kids, info = os.sysconf("SC_CLK_TCK"), {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            f = st[st.rindex(")") + 2:].split()
            kids.setdefault(int(f[1]), []).append(int(d))
            info[int(d)] = (st[st.index("(") + 1:st.rindex(")")], sum(int(x) for x in f[11:15]) / tck)
    out, todo = {}, list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        out[pid] = info.get(pid, ("?", 0.0))
        todo += kids.get(pid, [])
    return out


def run_optuna(args, data, configs, epochs):
    import optuna
    import torch  # noqa: F401  (imported before the first trial, as Ray Tune's workers do)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
              if args.workload == "asha" else optuna.pruners.NopPruner())
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=7),
                                pruner=pruner)
    lrs, drops = [c["lr"] for c in configs], [c["dropout"] for c in configs]
    units, batches = sorted({c["units"] for c in configs}), sorted({c["batch"] for c in configs})
    for c in configs:
        study.enqueue_trial({"lr": c["lr"], "units": c["units"], "dropout": c["dropout"],
                             "batch": c["batch"]})
    clock, curves, tests, start = Clock(args.threads), {}, {}, []

    def objective(trial):
        if not start:  # the process's CPU before its first trial: imports, data, the study
            t = os.times()
            start.append(t.user + t.system + t.children_user + t.children_system)
        cfg = {"lr": trial.suggest_float("lr", min(lrs), max(lrs), log=True),
               "units": trial.suggest_categorical("units", units),
               "dropout": trial.suggest_float("dropout", min(drops), max(drops)),
               "batch": trial.suggest_categorical("batch", batches)}
        want = configs[trial.number]
        if any(cfg[k] != want[k] for k in cfg):
            raise RuntimeError(f"trial {trial.number} got {cfg}, not the enqueued {want}")
        tr = Trainer(data, dict(cfg, threads=args.threads), seed=want["seed"])
        curve = curves[trial.number] = []
        for e in range(epochs):
            with clock:
                curve.append(tr.epoch())
            trial.report(curve[-1], e + 1)
            # the last epoch is no rung: the trial has ended, as in cohort and Ray Tune
            if e + 1 < epochs and trial.should_prune():
                raise optuna.TrialPruned()
        if tr.xt is not None:
            tests[trial.number] = tr.accuracy(tr.xt, tr.yt)
        return max(curve)

    study.optimize(objective, n_trials=len(configs))
    out = summary(configs, curves, tests, epochs)
    out.update({"inside_seconds": clock.wall, "inside_cpu_seconds": clock.cpu,
                "start_cpu_seconds": start[0],
                "pruned_by_optuna": sum(t.state == optuna.trial.TrialState.PRUNED
                                        for t in study.trials),
                "optuna": optuna.__version__})
    return out


def run_ray(args, data, configs, epochs):
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    t0 = time.perf_counter()
    ray.init(num_cpus=args.cores, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    init_s = time.perf_counter() - t0
    data_ref = ray.put(data)

    def trainable(cfg):
        import torch  # noqa: F401  (a worker's first import is its start, not a trial's training)
        want = configs[cfg["i"]]
        clock = Clock(1)
        tr = Trainer(ray.get(data_ref), dict(want, threads=1), seed=want["seed"])
        for e in range(epochs):
            with clock:
                acc = tr.epoch()
            rep = {"val_accuracy": acc, "inside": clock.wall, "inside_cpu": clock.cpu,
                   "pid": os.getpid(), "process_cpu": time.process_time()}
            if e == epochs - 1 and tr.xt is not None:
                rep["test_accuracy"] = tr.accuracy(tr.xt, tr.yt)
            tune.report(rep)

    sched = (ASHAScheduler(time_attr="training_iteration", max_t=epochs, grace_period=1,
                           reduction_factor=3) if args.workload == "asha" else FIFOScheduler())
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"i": tune.grid_search(list(range(len(configs))))},
        tune_config=tune.TuneConfig(num_samples=1, metric="val_accuracy", mode="max",
                                    scheduler=sched, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=os.path.join(ROOT, "bench/out/ray"),
                                  name=f"{args.workload}-{len(configs)}", verbose=0))
    # the start: this process's CPU (imports, data, ray.init) and the daemons' so far; the trial
    # workers' own start (ray's and torch's imports in each) falls in the trials' overhead
    t = os.times()
    start = t.user + t.system + t.children_user + t.children_system + sum(
        cpu for _, cpu in descendants_cpu().values())
    res = tuner.fit()
    curves, tests, inside, inside_cpu, workers = {}, {}, 0.0, 0.0, {}
    for r in res:
        if r.error:
            raise RuntimeError(f"Ray Tune trial {r.config}: {r.error}")
        df = r.metrics_dataframe.sort_values("training_iteration")
        i = r.config["i"]
        curves[i] = [float(a) for a in df["val_accuracy"]]
        last = df.iloc[-1]
        for pid, cpu in zip(df["pid"], df["process_cpu"]):
            workers[int(pid)] = max(workers.get(int(pid), 0.0), float(cpu))
        inside += float(last["inside"])
        inside_cpu += float(last["inside_cpu"])
        if "test_accuracy" in df and not np.isnan(last["test_accuracy"]):
            tests[i] = float(last["test_accuracy"])
    out = summary(configs, curves, tests, epochs)
    # The trial workers are the raylet's children, and their CPU reaches no rusage when they
    # end (neither this process's nor the command's): each trial reports its worker process's
    # CPU time so far with every epoch, and the workers still living are read from /proc here.
    # Per worker the larger of the two counts; what a worker spends after its last report and
    # before it ends (or before this reading) is missed. The raylet, the GCS and the agents
    # (ray::DashboardAgent, ray::RuntimeEnvAgent) are reaped into the command's rusage.
    living = descendants_cpu()
    for pid, (name, cpu) in living.items():
        if name.startswith("ray::") and not name.startswith(("ray::Dashboard", "ray::RuntimeEnv")):
            workers[pid] = max(workers.get(pid, 0.0), cpu)
    by_name = {}
    for name, cpu in living.values():
        by_name[name] = by_name.get(name, 0.0) + cpu
    out.update({"ray_processes_cpu_by_name": by_name, "ray_workers": len(workers),
                "start_cpu_seconds": start,
                "uncounted_cpu_seconds": sum(workers.values())})
    out.update({"ray_init_seconds": init_s, "inside_seconds": inside,
                "inside_cpu_seconds": inside_cpu, "ray": ray.__version__})
    ray.shutdown()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("sweep", "asha"), required=True)
    ap.add_argument("--tool", choices=("optuna", "ray"), required=True)
    ap.add_argument("--configs", required=True, help="JSON list of the configurations to train")
    ap.add_argument("--trials", type=int, help="the first N configurations (default: all)")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--threads", type=int, default=1, help="Optuna's torch threads (default 1)")
    args = ap.parse_args()
    if args.trials is not None and args.trials < 1:
        sys.exit("search.py: --trials must be at least 1")
    if args.threads < 1:
        sys.exit("search.py: --threads must be at least 1")
    if args.tool == "ray":
        args.threads = 1
    t0 = time.perf_counter()
    with open(args.configs) as f:
        n = len(json.load(f))
    configs = read_configs(args.configs, args.trials or n)
    epochs = 2 if args.workload == "sweep" else 9
    data = load(args.workload)
    r = (run_optuna if args.tool == "optuna" else run_ray)(args, data, configs, epochs)
    wall = time.perf_counter() - t0
    import torch
    r.update({"workload": args.workload, "tool": args.tool, "trials": len(configs),
              "epochs": epochs, "threads": args.threads, "wall_seconds_inside": wall,
              "per_trial_ms": 1000 * wall / len(configs),
              "inside_per_trial_ms": 1000 * r["inside_seconds"] / len(configs),
              "inside_cpu_per_trial_ms": 1000 * r["inside_cpu_seconds"] / len(configs),
              "torch": torch.__version__})
    json.dump(r, sys.stdout, default=str)
    print()


if __name__ == "__main__":
    main()
