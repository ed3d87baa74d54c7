"""Settings of the agent on each instance and of what the portal does with its reports
(L6, L8): heartbeats, the burn check, idle thresholds and the idle policy per priority
(imported by portal.settings)."""

from portal.env import env_bool, env_int, env_str

# The agent on each instance and what the portal does with its reports (L6, L8).
PORTAL_AGENT_HEARTBEAT_SECONDS = env_int("PORTAL_AGENT_HEARTBEAT_SECONDS", 60)
PORTAL_AGENT_MIN_INTERVAL_SECONDS = env_int("PORTAL_AGENT_MIN_INTERVAL_SECONDS", 10)
PORTAL_AGENT_MAX_SAMPLES = env_int("PORTAL_AGENT_MAX_SAMPLES", 120)
PORTAL_AGENT_URL = env_str("PORTAL_AGENT_URL", "http://localhost:8000")  # as instances see it
PORTAL_BURN_SECONDS = env_int("PORTAL_BURN_SECONDS", 60)
PORTAL_BURN_MIN_PERCENT = env_int("PORTAL_BURN_MIN_PERCENT", 50)  # of the rated BF16 TFLOPS
PORTAL_IDLE_THRESHOLD_PERCENT = env_int("PORTAL_IDLE_THRESHOLD_PERCENT", 5)
PORTAL_IDLE_REQUIRE_NOBODY_CONNECTED = env_bool("PORTAL_IDLE_REQUIRE_NOBODY_CONNECTED", False)
# Per priority, in consecutive idle samples: warn, reap (None: never), alert the manager.
PORTAL_IDLE_POLICY = {
    "learning": {
        "warn": env_int("PORTAL_IDLE_WARN_LEARNING", 20),
        "reap": env_int("PORTAL_IDLE_REAP_LEARNING", 30),
    },
    "experiment": {
        "warn": env_int("PORTAL_IDLE_WARN_EXPERIMENT", 20),
        "reap": env_int("PORTAL_IDLE_REAP_EXPERIMENT", 60),
    },
    "production": {
        "warn": env_int("PORTAL_IDLE_WARN_PRODUCTION", 20),
        "reap": None,
        "alert_manager": env_int("PORTAL_IDLE_ALERT_PRODUCTION", 60),
    },
}
