"""``python -m rsa_scheduler`` runs the ``rsa`` CLI."""

from rsa_scheduler.cli import main

if __name__ == "__main__":
    main()
