from alpha_rl.killcheck.cli import main

main()
