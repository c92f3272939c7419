#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
  cd $HOME
#RSA_DATA_OUT=/gpfs/alice/out
