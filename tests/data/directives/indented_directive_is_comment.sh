#!/bin/bash
  #RSA_DATA_IN=relative/ignored
#RSA_DATA_OUT=/gpfs/alice/out
