from mathneuro.cli.run import main

main()
