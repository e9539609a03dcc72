from mathneuro.cli import main

main()
