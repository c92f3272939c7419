"""The compute-node side: node Prolog/Epilog, the per-job node agent, safe mounts."""
