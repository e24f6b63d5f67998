"""Convergence bounds of the other algorithms paretofl runs (docs/theory.md §6).

* ALI-DPFL (Ling, Fu et al.): the bound h(τ) of Theorem 1
  (Eq. 7–8), τ₀ of Lemma 1, τ* of Lemma 2 — both the published Eq. (9) and
  the general minimiser √(c/a) of G(τ) = aτ + b + c/τ (Eq. 10–11) — and the
  server-side estimates of Algorithm 2, step 4.
* NbAFL (Wei et al. 2020): the Gaussian-mechanism noise of the uplink
  and downlink (Theorem 1, Eq. 10; Eq. 13), the bound of Theorem 2 (Eq. 14)
  with Lemma 3's λ's, its optimal T (Remark 4), K-client scheduling
  (Lemma 4, Eq. 16; Theorem 3, Eq. 17) and its optimal K (Remark 5).

The extracted text of Wei et al. garbled fractions and roots; the forms here
are reconstructed so that K = N gives back Theorem 1 (b = 1, threshold
L√N), and are tested for that and for monotonicity in ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ALIStep", "ali_noise_term", "ali_h", "ali_G_coefficients", "ali_tau0", "ali_tau_star",
    "ali_tau_star_eq9", "ali_estimate_mu", "ali_server_rounds", "ali_batch_hat", "ali_next_tau",
    "gaussian_c", "nbafl_sigma_uplink", "nbafl_sigma_downlink", "nbafl_sigma_aggregate",
    "nbafl_lambdas", "nbafl_theorem2_bound", "nbafl_optimal_rounds", "nbafl_b", "nbafl_gamma",
    "nbafl_sigma_downlink_k", "nbafl_theorem3_bound", "nbafl_optimal_k",
]


# --------------------------------------------------------------------------
# ALI-DPFL (Ling et al.)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class ALIStep:
    """The clipped, noised DP-SGD step ALI-DPFL's bounds are of (Ling et
    al., Theorem 1): strong convexity ``mu``, clip ``C``, noise multiplier
    ``sigma``, model dimension ``d``, batch ``B`` (the divisor of the noised
    sum), the clients' heterogeneity ``gamma`` (Γ) and the learning rate
    ``eta`` (None: Eq. (9)'s η = 1/(μT))."""

    mu: float
    C: float
    sigma: float
    d: int
    B: float
    gamma: float
    eta: float | None = None


def ali_noise_term(C, sigma, d, B):
    """V = C² + σ²C²d/B²: second moment of one clipped, noised DP-SGD step."""
    return C**2 + sigma**2 * C**2 * d / B**2


def _noise(s: ALIStep):
    return ali_noise_term(s.C, s.sigma, s.d, s.B)


def ali_G_coefficients(s: ALIStep, L, delta1):
    """(a, b, c) of G(τ) = aτ + b + c/τ, ALI-DPFL Eq. (11); h(τ) = τ/T · G(τ)."""
    V = _noise(s)
    K = 2 + s.eta * s.mu
    a = L * K * V / 2
    b = (L * delta1 - 2 * L * K * V) / 2
    c = L * (K * V + 4 / s.mu**2 + 3 * s.C**2 + 2 * s.gamma / s.eta + s.sigma**2 * s.C**2 * s.d / s.B**2) / 2
    return a, b, c


def ali_h(tau, T, s: ALIStep, L, delta1):
    """Convergence bound h(τ) of ALI-DPFL, Theorem 1, Eq. (8):
    E[F(w_T)] - F* <= h(τ), a quadratic in τ divided by 2T."""
    a, b, c = ali_G_coefficients(s, L, delta1)
    tau = np.asarray(tau, dtype=float)
    return (a * tau**2 + b * tau + c) / T


def ali_tau0(s: ALIStep, delta1):
    """Vertex of h(τ) (ALI-DPFL, Lemma 1): τ₀ = 1 - Δ₁/(2(2+ημ)V) < 1,
    so without a round limit τ = 1 is best."""
    return 1 - delta1 / (2 * (2 + s.eta * s.mu) * _noise(s))


def ali_tau_star(s: ALIStep):
    """General minimiser of G(τ) for the step's η: τ* = √(c/a)
    = √(1 + (4/μ² + 3C² + 2Γ/η + σ²C²d/B²) / ((2+ημ)V))."""
    return math.sqrt(1 + (4 / s.mu**2 + 3 * s.C**2 + 2 * s.gamma / s.eta + s.sigma**2 * s.C**2 * s.d / s.B**2)
                     / ((2 + s.eta * s.mu) * _noise(s)))


def ali_tau_star_eq9(s: ALIStep, T):
    """τ* exactly as published, ALI-DPFL Eq. (9): the general minimiser
    after substituting η = 1/(μT) (so ημ = 1/T and 2Γ/η = 2ΓTμ); the
    step's own η is not read."""
    return math.sqrt(1 + (4 / s.mu**2 + 3 * s.C**2 + 2 * s.gamma * T * s.mu + s.sigma**2 * s.C**2 * s.d / s.B**2)
                     / ((2 + 1 / T) * _noise(s)))


def ali_estimate_mu(grad_diff_norms, weight_diff_norms, p):
    """Server-side strong-convexity estimate (Algorithm 2, step 4.1):
    μ = Σ_i p_i ‖∇F_i(w_t^i) - ∇F_i(w_t)‖ / ‖w_t^i - w_t‖."""
    g, w, p = (np.asarray(x, dtype=float) for x in (grad_diff_norms, weight_diff_norms, p))
    return float(np.sum(p * g / np.maximum(w, 1e-12)))


def ali_server_rounds(R_s, R_c, tau_prev):
    """T = min(R_s·τ*_prev, R_c) (Algorithm 2, step 4.2)."""
    return min(R_s * tau_prev, R_c)


def ali_batch_hat(q, dataset_sizes):
    """B̂ = min_i q|D_i| (Algorithm 2, step 4.3)."""
    return float(q * np.min(dataset_sizes))


def ali_next_tau(R_s, R_c, s: ALIStep, tau_prev):
    """τ* for the next round: 1 when R_s >= R_c (Lemma 1), otherwise Eq. (9)
    with T = min(R_s τ*_prev, R_c); with the step's ``eta`` given, √(c/a)
    for that η instead.  Rounded to an integer number of local iterations
    (>= 1)."""
    if R_s >= R_c:
        return 1
    T = ali_server_rounds(R_s, R_c, tau_prev)
    t = ali_tau_star(s) if s.eta is not None else ali_tau_star_eq9(s, T)
    return max(1, int(round(t)))


# --------------------------------------------------------------------------
# NbAFL (Wei et al. 2020)
# --------------------------------------------------------------------------
def gaussian_c(delta):
    """c = √(2 ln(1.25/δ)) of the classic Gaussian mechanism σ >= cΔs/ε.
    (That calibration is proven for ε < 1; Wei et al. 2020 uses it beyond.)"""
    return math.sqrt(2 * math.log(1.25 / delta))


def nbafl_sigma_uplink(C, m, L, eps, delta):
    """σ_U = cLΔs_U/ε with Δs_U = 2C/m (Wei et al. 2020, Eq. 5–6): L exposures."""
    return gaussian_c(delta) * L * (2 * C / m) / eps


def nbafl_sigma_downlink(C, m, N, L, T, eps, delta):
    """σ_D of Wei et al. 2020, Theorem 1, Eq. (10):
    2cC√(T² - L²N)/(mNε) when T > L√N, else 0."""
    if T <= L * math.sqrt(N):
        return 0.0
    return 2 * gaussian_c(delta) * C * math.sqrt(T**2 - L**2 * N) / (m * N * eps)


def nbafl_sigma_aggregate(C, m, N, L, T, eps, delta):
    """σ_A = √(σ_D² + σ_U²/N) (Wei et al. 2020, Eq. 13)."""
    su = nbafl_sigma_uplink(C, m, L, eps, delta)
    sd = nbafl_sigma_downlink(C, m, N, L, T, eps, delta)
    return math.sqrt(sd**2 + su**2 / N)


def nbafl_lambdas(rho, B, mu):
    """λ₀ = ρ/2, λ₁ = 1/μ + ρB/μ, λ₂ = -1/μ + ρB/μ² + ρB²/(2μ²) (Lemma 3)."""
    return rho / 2, 1 / mu + rho * B / mu, -1 / mu + rho * B / mu**2 + rho * B**2 / (2 * mu**2)


def _constants(constants):
    """ρ, B, μ, l, β, Θ from a mapping of them (missing ones: :data:`NBAFL_CONSTANTS`)."""
    k = dict(NBAFL_CONSTANTS, **(constants or {}))
    return k["rho"], k["B"], k["mu"], k["l"], k["beta"], k["theta"]


def nbafl_theorem2_bound(T, eps, delta, C, m, N, constants=None):
    """Paper 004, Theorem 2, Eq. (14), ``constants`` ρ, B, μ, l, β, Θ a
    mapping (default :data:`NBAFL_CONSTANTS`):
    P^T Θ + (κ₁T/ε + κ₀T²/ε²)(1 - P^T), with P = 1 + 2lλ₂,
    κ₁ = λ₁βcC/(m(1-P))·√(2/(Nπ)), κ₀ = λ₀c²C²/(m²(1-P)N).
    Needs 0 < P < 1 (λ₂ < 0: a large enough proximal μ)."""
    rho, B, mu, l, beta, theta = _constants(constants)
    lam0, lam1, lam2 = nbafl_lambdas(rho, B, mu)
    P = 1 + 2 * l * lam2
    if not (0 < P < 1):
        raise ValueError(f"Theorem 2 needs 0 < P = 1 + 2·l·λ2 < 1, got P = {P:g}; raise mu or lower l")
    c = gaussian_c(delta)
    k1 = lam1 * beta * c * C / (m * (1 - P)) * math.sqrt(2 / (N * math.pi))
    k0 = lam0 * c**2 * C**2 / (m**2 * (1 - P) * N)
    T = np.asarray(T, dtype=float)
    return P**T * theta + (k1 * T / eps + k0 * T**2 / eps**2) * (1 - P**T)


def nbafl_optimal_rounds(eps, delta, C, m, N, constants=None, t_max=100_000):
    """The integer T minimising the Theorem 2 bound (Remark 4).

    h(T) is minimised over continuous T on a log scale (golden-section
    search to 1e-10 in log T: scipy is not imported for it, which would cost
    the design 0.2 s of start-up), then the integer neighbours of the
    minimiser are compared; where h is convex in T (the paper's condition:
    N and ε large enough) this is the optimum.
    """
    def h(logt):
        return float(nbafl_theorem2_bound(math.exp(logt), eps, delta, C, m, N, constants))

    t = math.exp(_golden_min(h, 0.0, math.log(t_max), 1e-10))
    cands = [c for c in {1, max(1, math.floor(t)), min(t_max, math.ceil(t)), t_max} if 1 <= c <= t_max]
    return min(cands, key=lambda c: h(math.log(c)))


def _golden_min(f, a: float, b: float, tol: float) -> float:
    """The minimiser of a unimodal ``f`` on [a, b] to ``tol``, by golden-section search."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2.0


def _sched_log(N, K, x):
    """ℓ = ln(1 - N/K + (N/K)·e^(-x)), x = ε/T.

    The argument falls to 0 once x >= -ln(1 - K/N); there ℓ -> -∞ and every
    term it scales vanishes, so the limit -∞ is returned.  That region lies
    below Lemma 4's threshold (x >= γ), where no downlink noise is added."""
    if K > N or K < 1:
        raise ValueError(f"the number of scheduled clients K must lie in 1..N, got K={K}, N={N}")
    arg = 1 - N / K + (N / K) * math.exp(-x)
    return math.log(arg) if arg > 0 else -math.inf


def nbafl_b(N, K, T, eps):
    """b = -(T/ε)·ln(1 - N/K + (N/K)e^(-ε/T)) of Lemma 4 (b = 1 when K = N)."""
    return -(T / eps) * _sched_log(N, K, eps / T)


def nbafl_gamma(N, K, L, eps):
    """γ = -ln(1 - K/N + (K/N)e^(-ε/(L√K))) of Lemma 4 (γ = ε/(L√N) at K = N)."""
    return -math.log(1 - K / N + (K / N) * math.exp(-eps / (L * math.sqrt(K))))


def nbafl_sigma_downlink_k(C, m, N, K, L, T, eps, delta):
    """σ_D under K-client random scheduling, Lemma 4, Eq. (16):
    2cC√(T²/b² - L²K)/(mKε) when T > ε/γ, else 0."""
    if T <= eps / nbafl_gamma(N, K, L, eps):
        return 0.0
    b = nbafl_b(N, K, T, eps)
    return 2 * gaussian_c(delta) * C * math.sqrt(max(T**2 / b**2 - L**2 * K, 0.0)) / (m * K * eps)


def nbafl_theorem3_bound(T, K, eps, delta, C, m, N, constants=None):
    """Paper 004, Theorem 3, Eq. (17), K-client scheduling (``constants`` as
    :func:`nbafl_theorem2_bound`'s):
    Q^T Θ + (1-Q^T)/(1-Q) · ( cCα₁β√(2/π) / (-mK·ℓ) + c²C²α₀ / (m²K²ℓ²) ),
    ℓ = ln(1 - N/K + (N/K)e^(-ε/T)),
    Q = 1 + (2l/μ²)(ρB²/2 + ρB + ρB²/K + 2ρB²/√K + μB/√K - μ),
    α₀ = 2ρK/N + ρ, α₁ = 1 + 2ρB/μ + 2ρB√K/(μN)."""
    rho, B, mu, l, beta, theta = _constants(constants)
    c = gaussian_c(delta)
    Q = 1 + 2 * l / mu**2 * (rho * B**2 / 2 + rho * B + rho * B**2 / K + 2 * rho * B**2 / math.sqrt(K)
                             + mu * B / math.sqrt(K) - mu)
    if not (0 < Q < 1):
        raise ValueError(f"Theorem 3 needs 0 < Q < 1, got Q = {Q:g}; raise mu or lower l")
    a0 = 2 * rho * K / N + rho
    a1 = 1 + 2 * rho * B / mu + 2 * rho * B * math.sqrt(K) / (mu * N)
    ell = _sched_log(N, K, eps / T)
    noise = 0.0 if math.isinf(ell) else (
        c * C * a1 * beta * math.sqrt(2 / math.pi) / (-m * K * ell) + c**2 * C**2 * a0 / (m**2 * K**2 * ell**2))
    return Q**T * theta + (1 - Q**T) / (1 - Q) * noise


def nbafl_optimal_k(T, eps, delta, C, m, N, constants=None):
    """The K in 1..N minimising the Theorem 3 bound (Remark 5), by exhaustive
    search; K where the bound is undefined (Q outside (0, 1)) are skipped.
    Returns (K, bound)."""
    best = (None, math.inf)
    for K in range(1, N + 1):
        try:
            v = nbafl_theorem3_bound(T, K, eps, delta, C, m, N, constants)
        except ValueError:
            continue
        if v < best[1]:
            best = (K, v)
    if best[0] is None:
        raise ValueError("the Theorem 3 bound is undefined for every K at these settings")
    return best




#: the Theorem 2/3 constants nbafl_design assumes where the user gives none:
#: illustrative values that meet the theorems' conditions (0 < P, Q < 1), not
#: estimates from data (ρ, B: smoothness and dissimilarity; μ: the proximal
#: term; l: the step; β: the update bound; Θ: the initial gap)
NBAFL_CONSTANTS = dict(rho=1.0, B=0.5, mu=5.0, l=0.5, beta=1.0, theta=10.0)


def nbafl_design(n_clients: int, epsilon: float, delta: float, clip: float, client_size: int,
                 max_rounds: int = 10_000, constants: dict | None = None) -> dict:
    """NbAFL's own design answers (Wei et al. 2020, Remarks 4 and 5): the
    number of aggregation rounds T* minimising Theorem 2's bound with all N
    clients, and the number of scheduled clients K* minimising Theorem 3's
    bound at T*, for protection level ε (the paper's), δ, clipping C and the
    smallest client data set m.  Beside them, the privacy each uplink
    calibration actually guarantees over T* uploads (a Gaussian of noise
    multiplier σ_U/(2C) each, parameter clipping bounding a change of the
    client's data by 2C; docs/theory.md §6): the paper's σ_U = cLΔs_U/ε
    (L = T*) and paretofl's, calibrated so that the guarantee is ε.
    ``constants``: ρ, B, μ, l, β, Θ of the bounds (default
    :data:`NBAFL_CONSTANTS`, stated, not estimated)."""
    from .privacy import calibrate_noise, compute_epsilon

    if constants is not None and not isinstance(constants, dict):
        raise ValueError(f"constants must be a mapping of NbAFL's constants ({', '.join(NBAFL_CONSTANTS)}), got "
                         f"{constants!r}")
    k = dict(NBAFL_CONSTANTS, **(constants or {}))
    unknown = set(k) - set(NBAFL_CONSTANTS)
    if unknown:
        raise ValueError(f"unknown NbAFL constants {', '.join(sorted(unknown))}; use {', '.join(NBAFL_CONSTANTS)}")
    for name, v in k.items():          # the bounds divide by them and take their logs: positive, finite numbers
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"NbAFL's constant {name} must be a positive finite number, got {v!r}")
    args = dict(delta=delta, C=clip, m=client_size, N=n_clients, constants=k)
    T = nbafl_optimal_rounds(epsilon, t_max=max_rounds, **args)
    K, bound_k = nbafl_optimal_k(T, epsilon, **args)
    sigma_paper = nbafl_sigma_uplink(clip, client_size, T, epsilon, delta)
    z = sigma_paper / (2 * clip)
    guaranteed = compute_epsilon(1.0, z, T, delta) if z >= 1e-6 else math.inf
    sigma_ours = 2 * clip * calibrate_noise(epsilon, 1.0, T, delta)
    return {"rounds": int(T), "clients_per_round": int(K), "bound_all_clients": float(nbafl_theorem2_bound(
                T, epsilon, **args)), "bound_scheduled": float(bound_k), "epsilon_paper": float(epsilon),
            "sigma_uplink_paper": float(sigma_paper), "epsilon_guaranteed_paper": float(guaranteed),
            "sigma_uplink_clipping": float(sigma_ours),
            "epsilon_guaranteed_clipping": float(compute_epsilon(1.0, sigma_ours / (2 * clip), T, delta)),
            "constants": k, "constants_source": "given" if constants else "stated defaults (NBAFL_CONSTANTS)",
            "n_clients": int(n_clients), "delta": float(delta), "clip": float(clip), "client_size": int(client_size)}
