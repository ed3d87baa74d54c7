"""The portal's side of the agent: what an instance reports (heartbeats, samples and their
roll-ups), idle counting and reaping (L6), health (L8). The agent program itself, which
runs on the instance, is ``agent/`` at the top of the repository; its installation at
launch is ``rental.fleet.agent_install``. May import the fleet, the loan model and the
catalog, never the way in (views, API, tasks)."""
