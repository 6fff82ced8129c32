"""What every command line shares: its exit codes (`exit_codes`) and what it prints besides its
own lines (`output`). Nothing here imports the rest of the package."""
